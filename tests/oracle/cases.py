"""What a generator yields: a case, one file (bytes and a name: pandas reads the
name) or a folder (relative paths to bytes; ``../name`` lands beside the folder,
for metadata that points outside it)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace


@dataclass
class Case:
    generator: str
    variant: str  # a bounded label: findings are told apart by it
    kind: str  # which readers the case is made for (readers.Reader.kinds)
    hostile: bool | None  # a working payload (True), none (False), or unknown (None: mutated, inert spellings)
    name: str = "case.bin"
    data: bytes | None = None
    files: dict[str, bytes] | None = None
    notes: dict = field(default_factory=dict)

    @property
    def folder(self) -> bool:
        return self.files is not None

    def digest(self) -> str:
        h = hashlib.sha1()
        if self.files is None:
            h.update(self.data or b"")
        else:
            for rel in sorted(self.files):
                h.update(rel.encode() + b"\0" + hashlib.sha1(self.files[rel]).digest())
        return h.hexdigest()

    def size(self) -> int:
        return len(self.data or b"") if self.files is None else sum(map(len, self.files.values()))

    def write(self, where: str) -> str:
        """Materialise the case under the empty folder ``where``; the path to read."""
        if self.files is None:
            path = os.path.join(where, self.name)
            with open(path, "wb") as f:
                f.write(self.data or b"")
            return path
        root = os.path.join(where, "root", self.name)
        os.makedirs(root)
        for rel, data in self.files.items():
            target = os.path.normpath(os.path.join(root, rel))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
        return root

    def with_data(self, data: bytes, variant: str | None = None, hostile: bool | None = None) -> Case:
        return replace(self, data=data, variant=variant or self.variant, hostile=hostile, notes=dict(self.notes))

    def with_files(self, files: dict[str, bytes], variant: str | None = None, hostile: bool | None = None) -> Case:
        return replace(self, files=files, variant=variant or self.variant, hostile=hostile, notes=dict(self.notes))
