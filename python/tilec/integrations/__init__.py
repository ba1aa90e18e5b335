"""Integrations of tilec with other libraries; each module imports its library.

    import tilec.integrations.transformers   # attn_implementation="tilec"
"""
