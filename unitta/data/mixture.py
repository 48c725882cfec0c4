"""``datasets_as_domains: [imagenet-r, imagenet-sketch, imagenet-a]``: several natural-shift sets as the domains of
one pool (docs/own_data.md), so that UniTTA's domain Markov chain moves between datasets.

Every domain of every member is a domain of the mixture (``imagenet-r``; ``domainnet126/clipart``, ...). Classes are
matched by key: a wnid for the ImageNet variants (ImageNet-V2's folders ``0..999`` are ImageNet class indices, so
folder ``k`` is ``imagenet_wnids()[k]``), the folder name otherwise. The mixture's classes are those every member
has (their intersection, in ImageNet's class-index order when all are wnids, else sorted), or the ``classes`` given;
a class that some member lacks would leave a (domain, class) state without images. The index is the members'
indexes filtered and relabelled: names only, nothing decoded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unitta.data.folder import FolderIndex, FolderProblem
from unitta.data.natural import data_root, imagenet_wnids, index_dataset
from unitta.data.records import RECORDS

__all__ = ["check_members", "index_any", "index_mixture"]


def check_members(members: Sequence[str]) -> list[str]:
    """``members`` if they can form a mixture, else a ValueError naming the one that cannot."""
    members = list(members)
    if len(members) < 2 or len(set(members)) != len(members):
        raise ValueError(f"datasets_as_domains: {members}: expected at least two distinct natural-shift datasets")
    for name in members:
        if name not in RECORDS or RECORDS[name].loader != "natural":
            image_sets = [n for n, r in RECORDS.items() if r.loader == "natural"]
            raise ValueError(f"datasets_as_domains: {name!r} is not an image-folder natural-shift dataset "
                             f"({', '.join(image_sets)})")
    families = {RECORDS[n].preset_family for n in members}
    if len(families) > 1:
        raise ValueError(f"datasets_as_domains: {members} mix preset families {sorted(families)}")
    return members


def one_domain_problem(dataset: str, domain_names: Sequence[str]) -> str | None:
    """Why a stream cannot be drawn from ``dataset``'s domains (fewer than two), with the fix that fits it: a
    natural-shift set joins a mixture (``check_members``), an image folder needs a second domain folder."""
    if len(domain_names) >= 2:
        return None
    found = f"one domain ({domain_names[0]})" if domain_names else "no domain"
    if dataset in RECORDS and RECORDS[dataset].loader == "natural":
        return (f"{dataset}: {found}; a stream needs at least two: use it as one domain of a mixture (dataset: "
                f"mixture, datasets_as_domains: [{dataset}, ...])")
    return (f"{dataset}: {found}; a stream needs at least two: put each domain's class folders in a folder of its "
            "own, ROOT/<domain>/<class>/<image> (docs/own_data.md)")


def _keys(name: str, classes: list[str]) -> list[str]:
    if name == "imagenet-v2":
        wnids = imagenet_wnids()
        return [wnids[int(c)] for c in classes]
    return list(classes)


def _order(keys: set[str]) -> list[str]:
    position = {w: k for k, w in enumerate(imagenet_wnids())}
    if all(k in position for k in keys):
        return sorted(keys, key=position.__getitem__)
    return sorted(keys)


def index_mixture(
    members: Sequence[str], data_dir: str | Path | None, default_dir: Path, classes: Sequence[str] | None = None
) -> FolderIndex:
    """One ``FolderIndex`` over the members' domains (root: the data directory; domain folders below it)."""
    members = check_members(members)
    indexes = [index_dataset(name, data_dir, default_dir) for name in members]
    problems = [f"{name}: {p}" for name, index in zip(members, indexes) for p in index.problems]
    keys = [_keys(name, index.classes) for name, index in zip(members, indexes)]
    chosen = list(classes) if classes is not None else _order(set.intersection(*(set(k) for k in keys)))
    if not chosen:
        raise FolderProblem([f"datasets_as_domains: {', '.join(members)} share no class; list classes: to use"])
    label_of = {key: k for k, key in enumerate(chosen)}
    root = data_dir if data_dir else default_dir
    names, dirs, files, labels = [], [], [], []
    sha = hashlib.sha256()
    for name, index, member_keys in zip(members, indexes, keys):
        for c, key in enumerate(member_keys):
            if key not in label_of and classes is not None and key in chosen:
                problems.append(f"{name}: no class folder {index.classes[c]!r}")
        missing = [key for key in chosen if key not in member_keys]
        if missing:
            problems.append(f"{data_root(RECORDS[name], data_dir, default_dir)}: no class {missing[0]!r} "
                            f"({len(missing)} of the mixture's classes missing); list classes: to use")
        relabel = np.array([label_of.get(key, -1) for key in member_keys], dtype=np.int64)
        start = 0
        for domain, domain_dir, domain_files in zip(index.domain_names, index.domain_dirs, index.files):
            domain_labels = relabel[index.labels[start : start + len(domain_files)]]
            start += len(domain_files)
            keep = np.flatnonzero(domain_labels >= 0)
            names.append(name if domain == name else f"{name}/{domain}")
            dirs.append(str(Path(RECORDS[name].folder or "") / domain_dir))
            files.append([domain_files[i] for i in keep])
            labels.append(domain_labels[keep])
        sha.update(f"{name}\0{index.digest}\n".encode())
    sha.update("\0".join(chosen).encode())
    return FolderIndex(str(root), names, dirs, chosen, files, np.concatenate(labels), sha.hexdigest(), problems)


_INDEXES: dict[tuple, FolderIndex] = {}  # a sweep's cells share their folder's index (see index_any)


def _stamp(root: Path) -> tuple:
    """Modification times of ``root`` and its folders two levels down: a file added, removed or renamed in a
    class folder changes its folder's time (no file is stat'ed here: D + D*K calls, not N)."""
    stamps = []
    try:
        for level1 in [root, *(Path(e.path) for e in os.scandir(root) if e.is_dir())]:
            stamps.append((str(level1), level1.stat().st_mtime_ns))
            if level1 != root:
                stamps += [(e.path, e.stat().st_mtime_ns) for e in os.scandir(level1) if e.is_dir()]
    except OSError:
        return ()
    return tuple(stamps)


def index_any(
    name: str,
    data_dir: str | Path | None,
    default_dir: Path,
    domains: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
    members: Sequence[str] | None = None,
) -> FolderIndex:
    """The index of a folder, an image-folder natural-shift set or a mixture (``name='mixture'``, ``members``).

    Kept per process while its folders' modification times stay the same, so that the cells of a sweep (their
    identities, the preflight, the driver's dataset) index a folder once."""
    roots = [data_root(RECORDS[m], data_dir, default_dir) for m in (members or [])] if members else \
        [data_root(RECORDS[name], data_dir, default_dir)] if RECORDS[name].loader != "mixture" else []
    key = (name, str(data_dir), str(default_dir), tuple(domains or ()), domains is None, tuple(classes or ()),
           classes is None, tuple(members or ()), tuple(_stamp(r) for r in roots))
    if key not in _INDEXES:
        if len(_INDEXES) > 64:
            _INDEXES.clear()
        _INDEXES[key] = _index_any(name, data_dir, default_dir, domains, classes, members)
    return _INDEXES[key]


def _index_any(name, data_dir, default_dir, domains, classes, members) -> FolderIndex:
    if RECORDS[name].loader == "mixture":
        if domains is not None:
            raise FolderProblem(["domains: a mixture's domains are its datasets_as_domains; drop domains"])
        return index_mixture(members or [], data_dir, default_dir, classes)
    if members:
        raise FolderProblem([f"datasets_as_domains: set dataset to mixture (not {name}) to mix datasets"])
    return index_dataset(name, data_dir, default_dir, domains, classes)
