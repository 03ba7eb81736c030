"""tools/'s Python scripts, run as modules from the repository root
(`python3 -m tools.chaos`) so that they import tests' helpers as a package."""
