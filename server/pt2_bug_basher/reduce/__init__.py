"""reduce"""
