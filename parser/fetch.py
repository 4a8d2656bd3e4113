"""Download a UD treebank's train/dev/test CoNLL-U files from GitHub.

    python -m parser.fetch UD_English-EWT [--root DIR] [--release 2.16]

File names come from the GitHub contents listing of the release tag; the files go to
``ROOT/<treebank>/`` (ROOT defaults to ``$UD_DIR``, else ``data/ud``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import urlopen

LISTING_URL = "https://api.github.com/repos/UniversalDependencies/{name}/contents?ref=r{release}"
FILE_URL = "https://raw.githubusercontent.com/UniversalDependencies/{name}/r{release}/{file}"
TIMEOUT_S = 10
SPLIT_FILE = re.compile(r"[^/]+-ud-(train|dev|test)\.conllu")


class FetchError(RuntimeError):
    """A treebank could not be downloaded; the message says what to do instead."""


def default_root() -> Path:
    """Where UD treebanks live: ``$UD_DIR``, else ``data/ud``."""
    return Path(os.environ.get("UD_DIR", "data/ud"))


def _download(url: str, target: Path) -> bytes:
    try:
        with urlopen(url, timeout=TIMEOUT_S) as response:
            return response.read()
    except HTTPError as error:
        raise FetchError(f"{url}: HTTP {error.code} {error.reason}; check the treebank name and"
                         f" release, or download the treebank manually into {target}") from error
    except (URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise FetchError(f"could not reach {url} ({reason}); download the treebank"
                         f" manually into {target}") from error


def fetch(name: str, root: str | os.PathLike | None = None, release: str = "2.16") -> list[Path]:
    """Download ``name``'s ``*-ud-{train,dev,test}.conllu`` files of UD ``release`` into
    ``root/name``; return their paths."""
    target = (Path(root) if root is not None else default_root()) / name
    listing = json.loads(_download(LISTING_URL.format(name=name, release=release), target))
    files = sorted(entry["name"] for entry in listing if SPLIT_FILE.fullmatch(entry["name"]))
    if not files:
        raise FetchError(f"{name} r{release} has no *-ud-{{train,dev,test}}.conllu files")
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for file in files:
        data = _download(FILE_URL.format(name=name, release=release, file=file), target)
        partial = target / f"{file}.part"
        partial.write_bytes(data)
        paths.append(partial.replace(target / file))
    return paths


def main(argv: list[str] | None = None) -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("treebank", help="UD repository name, e.g. UD_English-EWT")
    cli.add_argument("--root", help="directory for treebanks (default: $UD_DIR, else data/ud)")
    cli.add_argument("--release", default="2.16", help="UD release (default: %(default)s)")
    args = cli.parse_args(argv)
    try:
        paths = fetch(args.treebank, args.root, args.release)
    except FetchError as error:
        sys.exit(f"error: {error}")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
