"""The bundle: what a capture wrote to disk, the one input of every later stage.

`model` holds the record types, `store` writes and reads bundles (docs/bundle-format.md),
`validate` checks one.
"""
