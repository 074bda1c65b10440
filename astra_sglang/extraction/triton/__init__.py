"""`extract` for SGLang's Triton kernels: where a kernel, its launchers and its config knobs are, found with
`ast` in the installed source (discover.py), written to work/ (extract.py) as typed records (records.py)."""
