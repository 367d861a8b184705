"""posenc.spatial"""
