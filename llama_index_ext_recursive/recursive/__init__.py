"""recursive"""
