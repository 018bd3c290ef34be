# Kernels on the roofline of this machine. Redraw with `gnuplot roofline.gp` in this folder.
if (!exists("out")) out = "roofline.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set logscale xy
set xlabel "arithmetic intensity (FLOP per minimum byte)"
set ylabel "GFLOP/s"
set key left top box opaque
set xrange [0.03:1000]
set yrange [0.05:1000]
set samples 400
peak1 = 21.68; peak2 = 47.36; bw1 = 22.4; bw2 = 38.11
roof(x, p, b) = x * b < p ? x * b : p
plot roof(x, peak1, bw1) with lines lw 2 dt 2 lc rgb "gray40" title sprintf("ceiling, 1 thread (%.0f GFLOP/s, %.1f GB/s)", peak1, bw1), \
     roof(x, peak2, bw2) with lines lw 2 lc rgb "black" title sprintf("ceiling, 2 threads (%.0f GFLOP/s, %.1f GB/s)", peak2, bw2), \
     "roofline.dat" index 0 using 1:2 with points pt 5 ps 1.2 title "cuda/t1", \
     "roofline.dat" index 1 using 1:2 with points pt 7 ps 1.2 title "naive/t1"
