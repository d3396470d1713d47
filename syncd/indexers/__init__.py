"""indexers"""
