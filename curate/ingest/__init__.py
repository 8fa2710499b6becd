"""Stage 1, ingest: source adapters (``sources``), the built-in generator (``generate``) and the stage (``stage``)."""
