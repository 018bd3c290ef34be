# Speed-up vs ranks. Redraw with `gnuplot scaling.gp` in this folder.
if (!exists("out")) out = "scaling.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Speed-up against the smallest rank count"
set xlabel "ranks"
set ylabel "speed-up"
set key top left
set xrange [0:*]
set yrange [0:*]
plot "scaling.dat" using 1:2 with linespoints lw 2 dt 1 title "mpi t1", \
     "scaling.dat" using 1:3 with linespoints lw 1.5 dt 2 title "ideal (from 1 ranks)"
