"""The op specs: one TOML per op, and models.toml (the model shapes they are measured at). Extraction reads
them and every stage checks against them; installed as astra_sglang._specs (see pyproject.toml)."""
