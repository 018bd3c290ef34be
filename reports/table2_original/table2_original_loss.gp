# Loss per epoch. Redraw with `gnuplot table2_original_loss.gp` in this folder.
if (!exists("out")) out = "table2_original_loss.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Loss per epoch, original corpus and initialisation (ours solid, paper dashed)"
set xlabel "epoch"
set ylabel "loss"
set key top right
plot "table2_original_loss.dat" using 1:2 with lines lw 2 dt 1 title "serial r1 t2", \
     "table2_original_loss.dat" using 1:3 with lines lw 1.5 dt 2 title "paper serial", \
     "table2_original_loss.dat" using 1:4 with lines lw 2 dt 1 title "mpi r2 t1", \
     "table2_original_loss.dat" using 1:5 with lines lw 1.5 dt 2 title "paper mpi"
