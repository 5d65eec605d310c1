"""End-to-end tests: the synthesized stage stood up on moto (see ``embedded``)."""
