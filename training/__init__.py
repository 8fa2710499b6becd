"""Training on curated shards: rewards (over curate.verify), SFT, GRPO/CISPO."""
