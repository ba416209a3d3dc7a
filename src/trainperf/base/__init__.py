"""What every part uses: argument checks that name the argument, the process's identity (rank,
cores, the user's stack level), names a package imports on first use, and, imported on first use,
whole-or-nothing file writes, appends that never glue to a cut line and the progress of a long command."""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__: list[str] = []

# used by the other parts of trainperf
from ._check import check_bool as check_bool
from ._check import check_callable as check_callable
from ._check import check_clock as check_clock
from ._check import check_int as check_int
from ._check import check_part as check_part
from ._check import check_seconds as check_seconds
from ._check import check_str as check_str
from ._check import is_int as is_int
from ._lazy import lazy_names as lazy_names
from ._process import bad_iteration as bad_iteration
from ._process import env_int as env_int
from ._process import env_rank as env_rank
from ._process import host_name as host_name
from ._process import iteration_error as iteration_error
from ._process import local_run_folder as local_run_folder
from ._process import process_age as process_age
from ._process import ray_train_run_folder as ray_train_run_folder
from ._process import usable_cores as usable_cores
from ._process import user_stacklevel as user_stacklevel

if TYPE_CHECKING:
    from ._atomic import atomic_write as atomic_write
    from ._atomic import open_to_append as open_to_append
    from ._atomic import remove_leftovers as remove_leftovers
    from ._progress import Progress as Progress

# a file written whole or not at all (the file sinks', the report's and the command line's), and the
# progress of a long command
if not TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__, __dir__ = lazy_names(__name__, {"atomic_write": "._atomic", "open_to_append": "._atomic",
                                                 "remove_leftovers": "._atomic",
                                                 "Progress": "._progress"})
