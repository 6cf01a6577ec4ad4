"""retrievers"""
