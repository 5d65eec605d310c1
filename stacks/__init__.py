"""MangaAssist stacks: they compose constructs from constructs_lib and wire them, nothing else."""
