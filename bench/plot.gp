# plot.gp - the results plot of `make bench` (bench/run.sh): three panels from the data files that
# bench/run.sh and bench/render.py leave in the results folder.
#   gnuplot -e "dir='RESULTS_DIR'; out='bench/results.png'" bench/plot.gp
# plot_ram.dat:     set pagestream torch decode_ceiling full_decode   (images/s)
# plot_storage.dat: "label" percent_of_ceiling goal_percent
# plot_mem.dat:     cache_size arena_MiB peak_rss_MiB bound_MiB classes_sorted full_permutation classes_shuffled
if (!exists("dir")) dir = "."
if (!exists("out")) out = "results.png"
# an empty panel that says why (gnuplot refuses a plot with no valid point, so draw one off-range)
empty(msg) = sprintf("set label 1 '%s' at graph 0.3, graph 0.5; set xrange [0:1]; set yrange [0:1]; plot -1 notitle; unset label 1; set autoscale x", msg)
has(f) = system(sprintf("test -s '%s/%s' && echo 1 || echo 0", dir, f)) + 0

set terminal pngcairo size 1500,480 font "DejaVu Sans,10"
set output out
set multiplot layout 1,3 title "pagestream: make bench (figures measured in one run; see RESULTS.md)"
set style fill solid 0.85 border -1
set grid ytics lc rgb "#dddddd"
set key top left
set boxwidth 0.9

# ---- 1. decode-bound (RAM): images/s
set title "Dataset in RAM: images/s (RandomResizedCrop 224)"
set key top left font ",8"
set offsets 0, 0, graph 0.25, 0
set style data histogram
set style histogram clustered gap 1
set ylabel "images/s"
set yrange [0:*]
set xtics nomirror
if (has("plot_ram.dat")) {
    plot dir."/plot_ram.dat" using 3:xtic(1) title "PyTorch DataLoader" lc rgb "#e07b39", \
         '' using 2 title "pagestream" lc rgb "#2a7ab0", \
         '' using 4 title "bare crop-aware decode (ceiling)" lc rgb "#7f7f7f", \
         '' using 5 title "full decode + crop (FFCV's way)" lc rgb "#c8c8c8"
} else {
    eval empty("RAM scenario not run")
}

# ---- 2. storage: % of the ceiling
set offsets 0, 0, 0, 0
set title "Storage: % of the ceiling (EBS, NFS: payload; S3, HTTP: bytes read)"
set style histogram clustered gap 1
set xtics rotate by -25 font ",9"
set ylabel "% of device limit / range-GET ceiling"
set yrange [0:110]
unset key
if (has("plot_storage.dat")) {
    plot dir."/plot_storage.dat" using 2:xtic(1) lc rgb "#2a7ab0" notitle, \
         '' using 0:($3 > 0 ? $3 : 1/0) with points pt 7 ps 1.5 lc rgb "#d62728" title "goal", \
         '' using 0:2:(sprintf("%.1f%%", $2)) with labels offset 0,0.8 notitle
} else {
    eval empty("no storage scenario run")
}

# ---- 3. memory against --cache-size
set title "EBS-like, 1 GiB cgroup: peak RSS and shuffle quality vs --cache-size"
set xtics norotate font ",10"
set key bottom right font ",8" opaque
set style data linespoints
set ylabel "MiB"
set yrange [0:*]
set y2label "distinct classes per batch"
set y2tics
set y2range [0:*]
if (has("plot_mem.dat")) {
    plot dir."/plot_mem.dat" using 0:3:xtic(1) with linespoints lw 2 pt 7 lc rgb "#2a7ab0" title "peak RSS", \
         '' using 0:4 with lines dt 2 lw 2 lc rgb "#d62728" title "bound: cache + fixed + 64 MiB", \
         '' using 0:2 with lines lw 1 lc rgb "#7f7f7f" title "cache arena", \
         '' using 0:5 axes x1y2 with linespoints pt 5 lc rgb "#2ca02c" title "classes/batch, class-sorted pack", \
         '' using 0:7 axes x1y2 with linespoints pt 9 lc rgb "#9467bd" title "classes/batch, shuffled pack", \
         '' using 0:6 axes x1y2 with lines dt 3 lc rgb "#2ca02c" title "classes/batch (full permutation)"
} else {
    eval empty("EBS scenario not run")
}
unset multiplot
