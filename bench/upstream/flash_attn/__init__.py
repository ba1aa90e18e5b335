"""A stand-in `flash_attn` package that routes flash-attention's own test
suite (tests/test_flash_attn.py, run by bench/upstream_tests.sh) to tilec.
Only what that suite imports is here; every function is tilec's."""
from tilec import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "2.8.4+tilec"
