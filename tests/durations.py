"""Where the suite's time goes, by file: the test time (setup, call and teardown) of each test
file summed from pytest's JUnit XML reports (make test writes build/test-times/*.xml, one per
part), most first. Test time is worker time: with 2 xdist workers it is about twice the wall.

    python -m tests.durations build/test-times/*.xml"""
import collections
import sys
import xml.etree.ElementTree as ET


def by_file(paths):
    total, count = collections.Counter(), collections.Counter()
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            name = case.get("classname", "").replace(".", "/") + ".py"
            total[name] += float(case.get("time") or 0)
            count[name] += 1
    return total, count


def main(argv):
    if not argv:
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    try:
        total, count = by_file(argv)
    except (OSError, ET.ParseError) as e:
        print(f"tests.durations: {e}", file=sys.stderr)
        return 2
    print("test time by file (s, tests, file):")
    for name, t in total.most_common():
        if t >= 1:
            print(f"{t:8.1f} {count[name]:4d}  {name}")
    s = sum(total.values())
    print(f"{s:8.1f} {sum(count.values()):4d}  in all ({s / 60:.1f} min of test time)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
