"""End-to-end tests: the synthesized stage stood up on moto (see ``tests.e2e.harness``)."""
