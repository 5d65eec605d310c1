"""KMS on moto: a symmetric key's unused key pair is made only if something reads it.

moto gives every key it creates a private key for signing, a 2048-bit RSA one for a symmetric
key too, although only ``Sign``, ``Verify`` and ``GetPublicKey`` read it and AWS refuses those on a
symmetric key. Generating it costs tens of milliseconds of CPU per key, and every stage creates
all its keys again. Inside :func:`key_pairs_on_use`, a symmetric key's pair is generated the first
time anything reads it, so whatever moto does with it is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from moto.kms import models
from moto.kms.utils import generate_private_key as generate

#: The key spec of a symmetric key (``CreateKey``'s default).
SYMMETRIC = "SYMMETRIC_DEFAULT"


class OnFirstUse:
    """Stands for the value ``make()`` returns, made when one of its attributes is first read."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._made: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own state, and what copy and pickle look for, are not the value's
            raise AttributeError(name)
        if self._made is None:
            self._made = self._make()
        return getattr(self._made, name)


@contextmanager
def key_pairs_on_use() -> Iterator[None]:
    """A symmetric key's private key is generated when first read (see the module docstring)."""

    def generate_private_key(key_spec: str) -> Any:
        if key_spec == SYMMETRIC:
            return OnFirstUse(lambda: generate(key_spec))
        return generate(key_spec)

    with mock.patch.object(models, "generate_private_key", generate_private_key):
        yield
