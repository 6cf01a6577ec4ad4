"""stores"""
