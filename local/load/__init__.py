"""``make load``: concurrent customers on the embedded stage."""
