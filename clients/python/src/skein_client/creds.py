"""Credentials, found the way the skein CLI finds them (docs/security.md)."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Mapping, Optional

# The first of the comment lines older skein versions wrote above the seed; such files still
# load, and the identity the line names wins over the file's name.
IDENTITY_HEADER = "# skein identity: "
# The mesh's identities (docs/security.md): a credentials file named <identity>.nk is that
# identity's.
IDENTITIES = ("planner", "executor", "toolhost", "memoryd", "miner", "gateway", "client", "admin")
_SEED = re.compile(r"^\s*(SU[A-Z2-7]{56})\s*$", re.M)


class CredentialsError(Exception):
    """A credentials file that cannot be used."""


@dataclass(frozen=True)
class Credentials:
    path: str
    identity: str  # the skein identity of the file ("" for a JWT .creds file that names none)
    seed: Optional[str]  # an nkey seed file's seed (None for a JWT .creds file)
    jwt: bool

    @property
    def inbox_prefix(self) -> str:
        """The reply subject prefix this identity may read (_INBOX.<identity>)."""
        return "_INBOX." + self.identity if self.identity else "_INBOX"


def resolve(flag: Optional[str] = None, env: Optional[Mapping[str, str]] = None, identity: str = "client") -> Optional[str]:
    """--creds, then $SKEIN_CREDS, then $SKEIN_CREDS_DIR/<identity>.nk, then
    $SKEIN_HOME/creds/<identity>.nk ($SKEIN_HOME defaults to ./.skein) when it exists."""
    env = os.environ if env is None else env
    for p in (flag, env.get("SKEIN_CREDS")):
        if p:
            return p
    dirs = []
    if env.get("SKEIN_CREDS_DIR"):
        dirs.append(env["SKEIN_CREDS_DIR"])
    dirs.append(os.path.join(env.get("SKEIN_HOME") or ".skein", "creds"))
    for d in dirs:
        p = os.path.join(d, identity + ".nk")
        if os.path.isfile(p):
            return p
    return None


def load(path: str, identity: str = "client") -> Credentials:
    """Reads an nkey seed file (what skein writes: the seed alone, as `nk -gen user` and
    nats-py's nkeys_seed= want it; older skein files with comment lines too) or a NATS user
    .creds file; refuses a file others can read, as the CLI does.

    The identity, whose inbox prefix replies come on, is the one an older file's header names,
    else the file's name (<identity>.nk), else for a seed file the given one."""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise CredentialsError("credentials file %s: %s" % (path, e.strerror or e)) from e
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise CredentialsError(
            "credentials file %s is readable by others (mode %04o): run chmod 600 %s" % (path, stat.S_IMODE(st.st_mode), path)
        )
    named = ""
    for line in text.splitlines():
        if line.strip().startswith(IDENTITY_HEADER):
            named = line.strip()[len(IDENTITY_HEADER):].strip()
            break
    if not named:
        stem, ext = os.path.splitext(os.path.basename(path))
        if ext == ".nk" and stem in IDENTITIES:
            named = stem
    if "BEGIN NATS USER JWT" in text:
        return Credentials(path=path, identity=named, seed=None, jwt=True)
    m = _SEED.search(text)
    if not m:
        raise CredentialsError("credentials file %s: no nkey user seed in it" % path)
    return Credentials(path=path, identity=named or identity, seed=m.group(1), jwt=False)
