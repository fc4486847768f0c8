"""Python client of a skein agent mesh (docs/contract.md)."""

from .client import (
    Client,
    Message,
    Rejected,
    RunResult,
    SkeinError,
    Unavailable,
    Unreachable,
    new_session_id,
)
from .creds import CredentialsError
from .sync import SyncClient

__all__ = [
    "Client",
    "SyncClient",
    "RunResult",
    "Message",
    "SkeinError",
    "Rejected",
    "Unavailable",
    "Unreachable",
    "CredentialsError",
    "new_session_id",
]
__version__ = "0.1.0"
