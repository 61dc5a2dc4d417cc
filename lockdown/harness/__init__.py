"""Harness: starts MariaDB, php-fpm, nginx and a load generator in a run directory, and stops them."""
