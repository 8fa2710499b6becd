"""Prefect flows: thin wrappers over curate stages (no curation logic lives here).

- ``flows.curation``: the ``curate-dataset`` flow, one task per stage of a recipe (``python -m flows.curation``).
- ``flows.artifacts``: the summary, selection table and plots each run shows in the Prefect UI.
- ``flows.serve``: serves the deployments of ``prefect.yaml`` from one process (``python -m flows.serve``).
"""
