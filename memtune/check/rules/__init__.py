"""Rule modules, one per family; importing a module registers its rules."""
