import os, sys
root = sys.argv[1]
n, folders, size = 1_281_167, 1000, 112_640
per = -(-n // folders)
made = 0
for f in range(folders):
    d = os.path.join(root, f"n{f:08d}")
    os.makedirs(d, exist_ok=True)
    for i in range(min(per, n - made)):
        fd = os.open(os.path.join(d, f"img_{made:07d}.jpg"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.ftruncate(fd, size); os.close(fd)
        made += 1
print(made)
