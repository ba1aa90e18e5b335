"""The two names the suite imports from flash_attn.flash_attn_interface."""
from tilec import *  # noqa: F401,F403

USE_TRITON_ROCM = False


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """The key-block width the suite uses to decode S_dmask (upstream's rule
    for sm80/sm90, whose S_dmask layout tilec reproduces): 128 for head dims
    up to 32 and up to 64 without dropout, 32 at 65..128 with dropout, else 64."""
    assert head_dim <= 256
    if head_dim <= 32:
        return 128
    if head_dim <= 64:
        return 64 if is_dropout else 128
    if 96 < head_dim <= 128 and is_dropout:
        return 32
    return 64
