# Sourced by each VM tier's guest script (tests/vm/guest.sh, acs-guest.sh),
# from the payload: the boot count, and the recording every step goes through.
# Every step leaves NAME.out, NAME.err and NAME.rc under /results, and its
# guest seconds in /results/times; at each poweroff the results go to the third
# disk as a tar (tests/vm/run.sh reads it back).
R=/results
mkdir -p "$R" /var/lib/vm-test
boot=$(($(cat /var/lib/vm-test/boot 2>/dev/null || echo 0) + 1))
echo "$boot" >/var/lib/vm-test/boot
cut -d' ' -f1 /proc/uptime >"$R/boot$boot-init-uptime"
rm -f "$R/reboot"

up() { cut -d' ' -f1 /proc/uptime; }
# step NAME COMMAND...: runs it, recording its output, exit code and duration.
step() {
    name=$1
    shift
    s=$(up)
    "$@" >"$R/$name.out" 2>"$R/$name.err"
    echo $? >"$R/$name.rc"
    e=$(up)
    awk -v n="$name" -v s="$s" -v e="$e" 'BEGIN { printf "%-40s %6.1f s\n", n, e - s }' | tee -a "$R/times"
}
sh_step() {
    name=$1
    shift
    step "$name" sh -c "$*"
}
finish() {
    trap - EXIT
    dmesg >"$R/dmesg-boot$boot.txt"
    up >"$R/boot$boot-end-uptime"
    echo "$boot" >"$R/boots"
    tar -cf /dev/vdc -C "$R" .
    sync
}
trap finish EXIT
