"""Cluster simulator: realistic KRaft metadata logs with planted incidents and ground truth."""
