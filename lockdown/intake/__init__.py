"""`lockdown init`: an existing site (its files, its database, its access logs) made into a
target directory, reading the user's files and database only (docs/init.md)."""
