"""DataFrame equality for tests: one helper over Spark's own ``assertDataFrameEqual``.

``pyspark.testing.assertDataFrameEqual`` is the maintained successor of the ``pyspark-test``
package: it checks the schemas (types and names; nullability aside), compares maps, structs,
arrays, decimals and variants value by value, and treats NaN as equal to NaN. Its defaults let
floats and decimals differ by a relative 1e-5; the claims here are exact, so both tolerances are 0.
"""

from __future__ import annotations

import numpy as np
import pyspark
from pyspark.sql import DataFrame

# pyspark.testing imports PySpark's pandas API, which on Spark 3.5 still names np.NaN (gone in
# NumPy 2, which the tested pyarrow needs): the alias lets the 3.5 line's tests import it.
if pyspark.__version__.startswith("3.") and "NaN" not in vars(np):
    np.NaN = np.nan  # type: ignore[attr-defined]

from pyspark.testing import assertDataFrameEqual


def assert_same_frames(actual: DataFrame, expected: DataFrame, *, check_row_order: bool = False) -> None:
    """The two DataFrames hold the same rows (a multiset unless ``check_row_order``) and schema."""
    __tracebackhide__ = True
    assertDataFrameEqual(actual, expected, checkRowOrder=check_row_order, rtol=0.0, atol=0.0)
