"""Stage 5, select: filters, cluster quotas, DES-weighted sampling (``stage``); the selection folder (``export``)."""
