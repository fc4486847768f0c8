"""Python client of a skein agent mesh (docs/contract.md)."""

from .client import (
    Client,
    Message,
    OnDelta,
    Rejected,
    RunResult,
    SkeinError,
    Unavailable,
    Unreachable,
    new_session_id,
    new_turn_id,
)
from .creds import CredentialsError
from .sync import SyncClient

__all__ = [
    "Client",
    "SyncClient",
    "RunResult",
    "Message",
    "OnDelta",
    "SkeinError",
    "Rejected",
    "Unavailable",
    "Unreachable",
    "CredentialsError",
    "new_session_id",
    "new_turn_id",
]
__version__ = "0.1.0"
