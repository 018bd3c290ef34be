# Validation loss (median over seeds). Redraw with `gnuplot tensor_parallel_val.gp` in this folder.
if (!exists("out")) out = "tensor_parallel_val.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Validation loss (median over seeds)"
set xlabel "step"
set ylabel "validation loss"
set key top right
plot "tensor_parallel_val.dat" using 1:2 with linespoints lw 2 dt 1 title "mpi r1 t1", \
     "tensor_parallel_val.dat" using 1:3 with linespoints lw 2 dt 1 title "mpi r1 t2", \
     "tensor_parallel_val.dat" using 1:4 with linespoints lw 2 dt 1 title "mpi r2 t1", \
     "tensor_parallel_val.dat" using 1:5 with linespoints lw 2 dt 1 title "tp2 all tp", \
     "tensor_parallel_val.dat" using 1:6 with linespoints lw 2 dt 1 title "tp2 all spd", \
     "tensor_parallel_val.dat" using 1:7 with linespoints lw 2 dt 1 title "tp2 all parallel", \
     "tensor_parallel_val.dat" using 1:8 with linespoints lw 2 dt 1 title "tp2 tp,parallel,parallel,spd"
