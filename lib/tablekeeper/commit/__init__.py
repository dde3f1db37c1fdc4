"""The commit layer: typed changes become new snapshots, committed optimistically."""

from tablekeeper.commit.producer import SnapshotChange
from tablekeeper.commit.summary import SummaryDelta
from tablekeeper.commit.transaction import CommitResult, Committer, RetryPolicy

__all__ = ["CommitResult", "Committer", "RetryPolicy", "SnapshotChange", "SummaryDelta"]
