"""The gated delta rule (GDN): the torch references (``naive``: ``gdn_naive``,
``gdn_closed_form``) and the pure-JAX kernels (``jax.gdn_chunked``, ``jax.gdn_recurrent``)."""
