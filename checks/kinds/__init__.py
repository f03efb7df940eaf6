"""One recipe per job kind (checks/recipes.py); each module registers its own at import."""
