"""Lightning Attention in Triton."""
