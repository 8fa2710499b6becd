# Runtime environment shared by scripts/demo and scripts/test: offline hub access, quiet Prefect.
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
export HF_DATASETS_OFFLINE="${HF_DATASETS_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false
export PREFECT_SERVER_ANALYTICS_ENABLED=false
