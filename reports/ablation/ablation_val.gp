# Validation loss (median over seeds). Redraw with `gnuplot ablation_val.gp` in this folder.
if (!exists("out")) out = "ablation_val.svg"
set terminal svg size 800,500 dynamic enhanced
set output out
set datafile missing "NaN"
set key noenhanced
set grid
set title "Validation loss (median over seeds)"
set xlabel "step"
set ylabel "validation loss"
set key top right
plot "ablation_val.dat" using 1:2 with linespoints lw 2 dt 1 title "gpt2 (default)", \
     "ablation_val.dat" using 1:3 with linespoints lw 2 dt 1 title "position=rope", \
     "ablation_val.dat" using 1:4 with linespoints lw 2 dt 1 title "norm=rmsnorm position=rope", \
     "ablation_val.dat" using 1:5 with linespoints lw 2 dt 1 title "norm=rmsnorm position=rope mlp=swiglu", \
     "ablation_val.dat" using 1:6 with linespoints lw 2 dt 1 title "arch=llama", \
     "ablation_val.dat" using 1:7 with linespoints lw 2 dt 1 title "arch=llama mlp_hidden=392 n_kv_head=2"
