"""posenc.tasks"""
