import sys, collections
lines=[l.split(None,2) for l in open(sys.argv[1])]
t0=min(float(l[0]) for l in lines)
span={}; dur=collections.Counter(); st={}
for ts,kind,nid in lines:
    ts=float(ts)-t0; nid=nid.strip(); f=nid.split("::")[0]
    a,b=span.get(f,(1e9,0)); span[f]=(min(a,ts),max(b,ts))
    if kind=="start": st.setdefault(nid,ts)
    elif nid in st and nid not in dur: dur[nid]=ts-st[nid]  # the hooks run in the xdist worker and the controller: count each test once
end=max(b for a,b in span.values())
print("total span",round(end,1))
print("files by end time (last 12):")
for f,(a,b) in sorted(span.items(), key=lambda x:x[1][1])[-12:]:
    print(f"  {a:7.1f} {b:7.1f} {b-a:6.1f} {f}")
fd=collections.Counter()
for n,d in dur.items(): fd[n.split('::')[0]]+=d
print("files by duration (top 25):")
for f,d in fd.most_common(25): print(f"  {d:6.1f} {f}")
print("tests by duration (top 25):")
for n,d in dur.most_common(25): print(f"  {d:6.1f} {n}")
print("sum", round(sum(dur.values()),1))
