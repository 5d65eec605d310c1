"""MangaAssist Lambda code: one package, one code asset, thin handlers over shared domain code."""
