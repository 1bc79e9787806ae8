class Bare:
    def ready(self): return True
