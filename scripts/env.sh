# Runtime environment shared by scripts/demo and scripts/test: offline hub access, quiet Prefect.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export HF_DATASETS_OFFLINE="${HF_DATASETS_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# Prefect's temporary API server (flows run without PREFECT_API_URL) gets 300 s to start instead of 20 s: on a busy
# box its first start (database migrations) takes longer than 20 s and the flow fails with "Timed out while
# attempting to connect to ephemeral Prefect API server" (prefect 3.7.7: server.ephemeral.startup_timeout_seconds).
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="${PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS:-300}"
