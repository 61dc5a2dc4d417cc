"""The `lockdown run` directory as data: its documents' types (model.py) and the one way to
read and write them (store.py)."""
