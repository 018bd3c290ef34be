# Training loss (median over seeds). Redraw with `gnuplot tensor_parallel_loss.gp` in this folder.
if (!exists("out")) out = "tensor_parallel_loss.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Training loss (median over seeds)"
set xlabel "step"
set ylabel "training loss"
set key top right
plot "tensor_parallel_loss.dat" using 1:2 with lines lw 2 dt 1 title "mpi r1 t1", \
     "tensor_parallel_loss.dat" using 1:3 with lines lw 2 dt 1 title "mpi r1 t2", \
     "tensor_parallel_loss.dat" using 1:4 with lines lw 2 dt 1 title "mpi r2 t1", \
     "tensor_parallel_loss.dat" using 1:5 with lines lw 2 dt 1 title "tp2 all tp", \
     "tensor_parallel_loss.dat" using 1:6 with lines lw 2 dt 1 title "tp2 all spd", \
     "tensor_parallel_loss.dat" using 1:7 with lines lw 2 dt 1 title "tp2 all parallel", \
     "tensor_parallel_loss.dat" using 1:8 with lines lw 2 dt 1 title "tp2 tp,parallel,parallel,spd"
