"""The gated delta rule in pure JAX. Import the kernels from their modules (a package attribute of
the same name would shadow the module): ``gdn_chunked.gdn_chunked`` (WY form) and
``gdn_recurrent.gdn_recurrent`` (token scan)."""
