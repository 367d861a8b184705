"""posenc.temporal"""
