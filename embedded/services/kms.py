"""KMS on moto: a symmetric key's unused key pair is made only if something reads it, and a key's id
can be the same at every deploy.

moto gives every key it creates a private key for signing, a 2048-bit RSA one for a symmetric
key too, although only ``Sign``, ``Verify`` and ``GetPublicKey`` read it and AWS refuses those on a
symmetric key. Generating it costs tens of milliseconds of CPU per key, and every stage creates
all its keys again. Inside :func:`key_pairs_on_use`, a symmetric key's pair is generated the first
time anything reads it, so whatever moto does with it is unchanged.

moto names a key with a random UUID, as KMS does. A key's id is written into what refers to it,
the export workflow's definition among them, and the embedded stage parses each definition text
once per process (``embedded.services.stepfunctions``): with a new id at every deploy, every
stage stood up again parsed that definition again. Inside :func:`key_id_of`, the key created gets
an id derived from a name, the same at every deploy and still a UUID.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final
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


#: The namespace of the key ids :func:`key_id_of` derives.
KEY_IDS: Final = uuid.UUID("6d1f7a3e-2b0c-4f4e-9a51-3c8e0b7d9f21")


@contextmanager
def key_id_of(name: str) -> Iterator[str]:
    """The key moto creates in the block gets the id derived from ``name``, which it yields.

    ``name`` says which key it is (a deployer passes account, region, stack and logical id), so
    two keys of one account get different ids and the same key the same id at every deploy.
    """
    key_id = str(uuid.uuid5(KEY_IDS, name))

    def generate_key_id(multi_region: bool = False) -> str:
        return f"mrk-{key_id}" if multi_region else key_id

    with mock.patch.object(models, "generate_key_id", generate_key_id):
        yield key_id
