import collections,sys
inc=collections.Counter();tot=0;native=0
for line in open(sys.argv[1]):
    stack,_,n=line.rstrip().rpartition(' ')
    if '_RayNodeCache' not in stack.split(';')[0]: continue
    n=int(n);tot+=n
    frames=[f for f in stack.split(';')[1:] if f]
    if not frames: native+=n
    for f in set(frames): inc[f]+=n
print(f"node cache samples: {tot}; without a Python frame (obstore's runtime threads and other native threads): {100*native/tot:.1f}%")
for f,c in inc.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 30): print(f"{100*c/tot:5.1f}% {f[:140]}")
