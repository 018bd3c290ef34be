# Loss per epoch. Redraw with `gnuplot table2_loss.gp` in this folder.
if (!exists("out")) out = "table2_loss.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Training loss per epoch (ours solid, paper dashed)"
set xlabel "epoch"
set ylabel "loss"
set key top right
plot "table2_loss.dat" using 1:2 with lines lw 2 dt 1 title "serial r1 t2", \
     "table2_loss.dat" using 1:3 with lines lw 2 dt 1 title "mpi r2 t1", \
     "table2_loss.dat" using 1:4 with lines lw 1.5 dt 2 title "paper serial", \
     "table2_loss.dat" using 1:5 with lines lw 1.5 dt 2 title "paper mpi", \
     "table2_loss.dat" using 1:6 with lines lw 1.5 dt 2 title "paper cuda", \
     "table2_loss.dat" using 1:7 with lines lw 1.5 dt 2 title "paper mpi_cuda"
