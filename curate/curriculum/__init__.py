"""Stage 6, curriculum: stage plans (``stage``, ``rules``), the online ``sampler`` and the replay ``simulate``."""
