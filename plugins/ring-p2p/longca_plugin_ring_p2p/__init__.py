"""longca CP strategy: ring attention with P2P K/V passing and zigzag load balancing."""
